"""The scale model (issue 32, "Scale on paper"): docs/scale.md shows the table that
benchmarks/scale_model.py prints, and the model behaves as the page says."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "scale_model.py"
PAGE = ROOT / "docs" / "scale.md"


def _model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_model", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_model"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_page_shows_the_table_the_script_prints() -> None:
    printed = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                             check=True, timeout=60).stdout.strip()
    shown = re.search(r"<!-- scale-model-table: start[^>]*-->\n(.*?)\n<!-- scale-model-table: end",
                      PAGE.read_text(encoding="utf-8"), re.S)
    assert shown is not None, "docs/scale.md has no table between its markers"
    assert shown.group(1).strip() == printed


def test_the_model_scales_with_shards_not_with_partitions() -> None:
    model = _model()
    Point, evaluate = model.Point, model.evaluate
    one = evaluate(Point(1, 1, 1000))
    assert one.bound == "shard document writes" and 4_900 < one.rate < 5_001
    # More partitions than shards buy nothing; partitions on one shard cost index writes.
    assert evaluate(Point(8, 4, 1000)).rate == evaluate(Point(4, 4, 1000)).rate
    assert evaluate(Point(4, 1, 1000)).rate <= one.rate
    assert 3.9 < evaluate(Point(4, 4, 1000)).rate / one.rate < 4.01
    # Few workers: the client's CPU binds.
    assert evaluate(Point(4, 4, 2)).bound == "workers (client CPU)"
    # The registry reads grow with the square of the fleet; an idle polling fleet's probes
    # with W x the shards holding activities (one probe per worker, not one per partition).
    big = evaluate(Point(16, 8, 1000))
    assert big.registry_keys == 1000 * 1000 / 5 and big.idle_claims == 8_000
