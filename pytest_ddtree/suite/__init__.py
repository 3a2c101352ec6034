"""The example suite, shipped with the plugin.

Run it from any directory with ``pytest --pyargs pytest_ddtree.suite`` (add
``--ddtree-endpoint=URL`` for your own server), or copy it into your repository to adapt
with ``ddtree-suite init tests/ddtree``. Its settings are in ``pytest.ini`` next to this file.
"""
