"""What every layer shares: JSON whose shape is the client's (`jsontypes`), YAML documents read
(`yamltext`)."""
