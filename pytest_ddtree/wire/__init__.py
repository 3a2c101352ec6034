"""The wire layer: what crosses the HTTP connection and nothing about pytest.

- ``protocol``: everything without I/O, shared by both clients: the endpoint's
  configuration, request building, the event decoder over bytes, the ``Completion``
  assembly, the ``ErrorKind`` of every failure, the retry rules and the stall guard;
- ``client``: the sync client, a thin I/O shell over ``protocol`` (the load runner,
  ``pytest_ddtree.measure.load.runner``, is the async one);
- ``completion``: the records a request produces (``Completion``, ``SpecStats``, ...);
- ``dialects``: budget placement and the servers' speculation-statistics dialects;
- ``tokens``: token counters (a ``tokenizer.json``, a server's ``/tokenize``, approximation);
- ``_net``: the socket-level deadline under httpx.
"""
