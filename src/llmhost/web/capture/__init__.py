"""Data capture, as SageMaker's DataCaptureConfig: a sample of inference requests and their answers,
written as SageMaker's JSON Lines to a folder or an S3 prefix by a background writer that never delays
nor fails a request (what does not fit its bounded queue is dropped and counted)."""
