"""`runnerq-mongo console`: RunnerQ's observability API and our own, over HTTP.

The server (app.py) is the standard library's ThreadingHTTPServer; the JSON it
serves is made by observability.py (RunnerQ's serde shapes) and endpoints.py
(ours), the live stream by stream.py (one shared tail), the rules of who may
ask what by security.py. Nothing here is imported unless the command runs.
"""
