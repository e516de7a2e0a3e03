"""The recall dataset that ships is the one `bench/recall.py --generate` writes."""

import json
from pathlib import Path

from bench.recall import DEFAULT_DATASET, generate


def test_the_shipped_recall_dataset_is_reproducible_and_well_formed(tmp_path: Path):
    fresh = tmp_path / "recall.json"
    generate(fresh)
    assert fresh.read_text() == DEFAULT_DATASET.read_text()
    data = json.loads(fresh.read_text())
    turn_ids = {t["turn_id"] for c in data["conversations"] for t in c["turns"]}
    assert len(data["questions"]) == 20
    for question in data["questions"]:
        assert question["evidence"] and set(question["evidence"]) <= turn_ids
