import re
from pathlib import Path

from services.cli.config_reference import BEGIN, COMMAND, END, reference
from shared.config import Settings, env_name

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CONFIGURATION = REPO / "docs" / "configuration.md"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first_block = text.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_the_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 250


def test_every_setting_is_in_the_configuration_table():
    table = {
        line.split("|")[1].strip().strip("`")
        for line in CONFIGURATION.read_text().splitlines()
        if line.startswith("| `")
    }
    missing = [env_name(f) for f in Settings.model_fields if env_name(f) not in table]
    assert missing == []


def test_the_configuration_reference_is_generated_from_the_settings():
    text = CONFIGURATION.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    assert 0 <= start < end, f"docs/configuration.md lost its markers; run `{COMMAND}`"
    assert text[start : end + len(END)] + "\n" == reference(), (
        f"docs/configuration.md is out of date with shared/config.py; run `{COMMAND}`"
    )


def test_every_link_between_the_documents_resolves():
    broken = []
    for document in (README, *sorted((REPO / "docs").glob("*.md"))):
        for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            name, _, anchor = target.partition("#")
            path = (document.parent / name).resolve() if name else document
            if not path.exists():
                broken.append(f"{document.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{document.name}: {target} (no such heading)")
    assert broken == []


def _anchors(path: Path) -> set[str]:
    """The ids GitHub gives the headings of a Markdown file."""
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    headings = re.findall(r"(?m)^#+ (.+)$", text)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_source_file_the_documents_name_exists():
    missing = [
        f"{document.name}: {path}"
        for document in (README, *sorted((REPO / "docs").glob("*.md")))
        for path in re.findall(
            r"\b(?:shared|services|tests|bench|infra)/[\w/]+\.\w+",
            document.read_text(encoding="utf-8"),
        )
        if not (REPO / path).exists()
    ]
    assert missing == []
