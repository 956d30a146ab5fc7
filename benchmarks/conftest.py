"""pytest puts this folder on ``sys.path`` when it loads this file, so the tests import ``bench`` and ``gpu_bench``."""
