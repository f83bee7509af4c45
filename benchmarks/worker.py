"""Child-process entry point: ``worker.py MODULE:FUNCTION PARAMS_JSON OUT_JSON``.

Imports ``MODULE`` from this folder, calls ``FUNCTION(params, probe)`` and writes its
dict (plus ``rss_base_mib``) to ``OUT_JSON``. An ImportError/AttributeError raised
by the side under test is reported as "not available yet" instead of a crash.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from harness import Probe, self_maxrss_mib  # noqa: E402

OPEN_FILES = 1 << 16


def raise_open_file_limit() -> int:
    """Allow 65,536 open files, as a training job over many prefixes would.

    Both libraries keep descriptors open per prefix (megatron-core about two), so
    10,000 prefixes need more than a default limit of 1,024 or 20,000.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limits in ((OPEN_FILES, max(hard, OPEN_FILES)), (min(hard, OPEN_FILES), hard)):
        try:
            if limits[0] > soft:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv) -> int:
    target, params_json, out_path = argv[1:4]
    nofile = raise_open_file_limit()
    module_name, func_name = target.split(":")
    side = "megatron-core" if func_name.startswith("megatron") else "tokenloom"
    probe = Probe()
    try:
        module = importlib.import_module(module_name)
        result = getattr(module, func_name)(json.loads(params_json), probe)
        status = 0
    except (ImportError, AttributeError, NotImplementedError, TypeError) as error:
        result = {
            "error": f"{side} side not available yet: {type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=-3),
        }
        status = 0
    except Exception as error:  # noqa: BLE001 - report, never crash the suite
        result = {
            "error": f"{side} side failed: {type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=-4),
        }
        status = 0
    result["rss_base_mib"] = probe.rss_base_mib
    result["open_file_limit"] = nofile
    result["rss_end_mib"] = self_maxrss_mib()
    Path(out_path).write_text(json.dumps(result, default=_jsonable))
    return status


def _jsonable(obj):
    """numpy scalars -> Python numbers."""
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
