"""fabric-node: the GPU-node agent's command line (fabric_node.main)."""
