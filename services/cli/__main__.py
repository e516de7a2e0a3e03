"""`python -m services.cli`: how `up` starts its children, whatever the PATH."""

import os
import sys

from services.cli.main import main

os.environ.setdefault("PYTHONUNBUFFERED", "1")
sys.exit(main())
