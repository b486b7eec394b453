"""cxlctl's test suite (a package, so helpers have one import path: tests.conftest, tests.vm.harness)."""
