"""`llmhost batch`: a batch file run to its end against a running server or endpoint (its Files and
Batches API) or a local model (a server started for the run), resumable, input and output as local
paths or s3://."""
