import base64
import configparser
import hashlib
import zipfile

from bench import dummies


def test_wheel_is_well_formed(tmp_path):
    wheel = dummies.write_wheel(7, tmp_path)
    assert wheel.name == "precision_bench_dummy_007-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = "precision_bench_dummy_007-1.0.0.dist-info"
        record = zf.read(f"{info}/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = zf.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}"
            assert int(size) == len(data)
        assert {line.rsplit(",", 2)[0] for line in record} == set(names)
        eps = configparser.ConfigParser()
        eps.read_string(zf.read(f"{info}/entry_points.txt").decode())
        assert dict(eps["precision_base.plugins"]) == {"dummy007": "precision_bench_dummy_007._info:INFO"}
        assert "Name: precision-bench-dummy-007" in zf.read(f"{info}/METADATA").decode()


def test_info_module_builds_a_valid_plugin_info(tmp_path):
    namespace: dict = {}
    exec(dummies.wheel_files(3)["precision_bench_dummy_003/_info.py"], namespace)
    info = namespace["INFO"]
    assert info.backend == "dummy003"
    assert info.requires == ("torch>=2.0",)
