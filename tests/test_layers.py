"""The layering of src/ (docs/ARCHITECTURE.md, "Layers"): `make check-layers` compiles
every src/*.c on its own and fails on a call or include of a layer above, a kernel memory
call outside os.c, a prototype outside the header of the file that defines it, or a .c
that does not compile alone. Its self-test shows that each of those is caught."""
from conftest import make, tail



def test_layers_hold():
    r = make("check-layers", lock="layers")            # (build/layers)
    assert r.returncode == 0, "make check-layers failed:\n" + tail(r.stdout + r.stderr)
    assert "check-layers: OK" in r.stdout + r.stderr, tail(r.stdout + r.stderr)


def test_layer_check_catches_violations():
    r = make("check-layers-selftest", lock="layers")   # (temporary folders)
    assert r.returncode == 0, "the layer checker's self-test failed:\n" + tail(r.stdout + r.stderr)
