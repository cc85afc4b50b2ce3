"""tilec inside other systems' runtimes. `compiler.integrations.torch`: compiled tiles as PyTorch operators
(torch.library custom ops over compiler.runtime). Nothing here is imported by the CLI or by `import compiler`;
each module imports its host library (torch) only when it registers something."""
