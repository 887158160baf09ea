"""The endpoint's control plane: components, their copies (processes pinned to CPUs within a memory
limit), placement, on-demand models, autoscaling, adapters changed at run time."""
