"""Tool implementations the operator tests' AgentTools name (`shop.tools:...`); the session
operator allows the module `shop` (chart value tools.allowedModules)."""
