"""The wire layer: what crosses the HTTP connection and nothing about pytest.

- ``client``: the pooled client (deadlines, size caps, retries, SSE reading);
- ``completion``: the records a request produces (``Completion``, ``SpecStats``, ...);
- ``dialects``: budget placement and the servers' speculation-statistics dialects;
- ``tokens``: token counters (a ``tokenizer.json``, a server's ``/tokenize``, approximation);
- ``_net``: the socket-level deadline under httpx.
"""
