"""Worker-side probes: what ran (graph replay or eager) for each target/drafter forward."""
