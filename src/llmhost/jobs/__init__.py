"""Work that is not a person waiting: OpenAI's Files and Batches, kept durably on disk (SQLite) and run
behind interactive traffic through the app's own routes, so a batch runs the same on one server as
behind an endpoint's router."""
