"""What every layer shares: JSON whose shape is the client's (`jsontypes`), JSON text as llmhost writes
it (`jsontext`), YAML documents read (`yamltext`)."""
