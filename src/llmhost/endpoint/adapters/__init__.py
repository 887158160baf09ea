"""An endpoint's LoRA adapters as data and rules: declared in the file, checked against their base, what
a change may do, and `/admin/adapters`."""
