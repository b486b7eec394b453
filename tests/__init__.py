"""cxlctl's test suite (a package, so helpers have one import path: tests.kit, tests.vm.harness)."""
