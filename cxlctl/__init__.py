"""cxlctl: inventory, tuning and launch tooling for CXL-expanded Linux hosts.

This module must stay import-light: `cxlctl status --json` is on scripts' hot
path, so nothing here may pull in rich, typer, pyudev or psutil.
"""

__version__ = "0.1.0"
