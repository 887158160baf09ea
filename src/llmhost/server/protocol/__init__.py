"""Request and response schemas of the APIs we speak (pydantic), kept apart from serving logic."""
