"""This repository's own test helpers: never published, installed from the tree where tests need them.

Each module is imported explicitly (this package imports nothing itself):

* :mod:`precision_testsupport.models`: toy LightningModules and data (torch, Lightning);
* :mod:`precision_testsupport.architectures`: the benchmarks' models, real architectures built from configs
  (transformers, imported when one is built), with their data;
* :mod:`precision_testsupport.launch`: N real ranks with a gloo process group (the conformance kit's launcher,
  :mod:`precision_base.testing.ranks`, plus an in-process world of one);
* :mod:`precision_testsupport.wheels`: real wheels of small plugin distributions, fresh venvs;
* :mod:`precision_testsupport.sites`: installed distributions written straight into a folder on ``sys.path``;
* :mod:`precision_testsupport.dummy` / :mod:`precision_testsupport.dummy_plugin`: the test plugin, backend ``dummy``.

The conformance kit plugin authors use is :mod:`precision_base.testing`, in the precision-base wheel.
``tools/check_dist.py`` fails a wheel that carries these modules, and a wheel of this package.
"""
