"""Where the ElasticPS tree and its binaries are, and the command line's own lists (job flags) read from them.

The binaries' folder is, first found: the `bin_dir` argument, $ELASTICPS_BIN, $EPS_BIN (the tests' and launchers'
variable), then ROOT/build/bin. ROOT (launcher/, scripts/) is $ELASTICPS_ROOT, $EPS_ROOT, else the tree this
package is in (python/elasticps/ -> ../..).
"""
import importlib.util
import os
import subprocess
import xml.etree.ElementTree as ElementTree
from typing import Dict, Optional

from .errors import ArgumentError

_HERE = os.path.dirname(os.path.abspath(__file__))

# Coordinator flags that the launcher sets for every job (local.sh): a Trainer may not set them.
LAUNCHER_FLAGS = frozenset({
    "shards", "workers", "bind", "run_dir", "addr_file", "token_file", "store", "curve_secret_key",
    "curve_server_key", "allowed_keys", "metrics_port", "metrics_host"})


class Tree:
    """The ElasticPS tree (`root`: launcher/, scripts/) and its binaries (`bin`). Immutable after construction;
    the flag listing is read from the coordinator once, on first use."""

    def __init__(self, bin_dir: Optional[str] = None, root: Optional[str] = None):
        self.root = os.path.abspath(root or os.environ.get("ELASTICPS_ROOT") or os.environ.get("EPS_ROOT")
                                    or os.path.join(_HERE, "..", ".."))
        self.bin = os.path.abspath(bin_dir or os.environ.get("ELASTICPS_BIN") or os.environ.get("EPS_BIN")
                                   or os.path.join(self.root, "build", "bin"))
        self._flags: Optional[Dict[str, str]] = None

    def binary(self, name: str) -> str:
        """The path of build/bin/NAME; ArgumentError when it is not there."""
        path = os.path.join(self.bin, name)
        if not os.access(path, os.X_OK):
            raise ArgumentError(f"{path} is missing: build ElasticPS (scripts/setup.sh), or name the folder of its "
                                "binaries with bin_dir=... or $ELASTICPS_BIN")
        return path

    def script(self, *parts: str) -> str:
        path = os.path.join(self.root, *parts)
        if not os.path.exists(path):
            raise ArgumentError(f"{path} is missing: set $ELASTICPS_ROOT to the ElasticPS tree")
        return path

    def env(self) -> Dict[str, str]:
        """The environment of every process this package starts: the binaries' folder and the tree, and no OpenMP
        spinning (several libtorch processes share the host)."""
        env = dict(os.environ, EPS_BIN=self.bin, EPS_ROOT=self.root)
        env.setdefault("OMP_WAIT_POLICY", "passive")
        return env

    def job_flags(self) -> Dict[str, str]:
        """{name: gflags type} of every job flag the coordinator defines (`coordinator --helpxml`, the flags of
        elastic/coordinator_main.cc), less those the launcher sets (LAUNCHER_FLAGS)."""
        if self._flags is None:
            p = subprocess.run([self.binary("coordinator"), "--helpxml"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=self.env(), timeout=60)
            # gflags exits 1 after --helpxml; what counts is the XML.
            try:
                doc = ElementTree.fromstring(p.stdout)
            except ElementTree.ParseError as e:
                raise ArgumentError(f"cannot read the coordinator's flags (coordinator --helpxml): {e}") from None
            flags = {}
            for flag in doc.iter("flag"):
                if (flag.findtext("file") or "").endswith("coordinator_main.cc"):
                    flags[flag.findtext("name")] = flag.findtext("type")
            if not flags:
                raise ArgumentError("the coordinator lists no job flag (coordinator --helpxml)")
            self._flags = {k: v for k, v in flags.items() if k not in LAUNCHER_FLAGS}
        return self._flags

    def load_script_module(self, name: str):
        """scripts/NAME.py as a module (the readers of events.jsonl and metrics.csv the tests and tools use), loaded
        under a private name."""
        path = self.script("scripts", name + ".py")
        spec = importlib.util.spec_from_file_location("_elasticps_scripts_" + name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
