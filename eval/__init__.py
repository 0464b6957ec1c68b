"""How we know it works: datasets, graders, experiment runners, reports and theory."""
