"""The adaptive depth policy, as small parts (runtime/depth.py is the public module):

- planner.py: cost estimates and α̂ → the round's γ and W (0: AR); no state
- probes.py: fork probes, drafted probes and AR checks, and their spacing
- stretches.py: how many steps an AR round writes in one request
- rates.py: the measured tokens per second of drafting against AR rounds
- governor.py: how many concurrent answers may draft at once (the rates, the client's CPU)
- alpha.py: α̂ per width
- faults.py: rounds whose draft or verifier failed: left out, AR while a role is down, and retries
- target_load.py: the target requests in flight across the answers
- round_plan.py: RoundPlan and the DepthPolicy protocol
- adaptive.py: AdaptiveDepth, these parts put together
"""
