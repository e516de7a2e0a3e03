from pathlib import Path

from shared.config import Settings, env_name

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CONFIGURATION = REPO / "docs" / "configuration.md"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first_block = text.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_every_setting_is_in_the_configuration_table():
    table = {
        line.split("|")[1].strip().strip("`")
        for line in CONFIGURATION.read_text().splitlines()
        if line.startswith("| `")
    }
    missing = [env_name(f) for f in Settings.model_fields if env_name(f) not in table]
    assert missing == []
