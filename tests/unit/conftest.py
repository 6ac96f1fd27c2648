import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab"))
sys.path.insert(0, str(REPO / "module_utils"))
sys.path.insert(0, str(REPO))
