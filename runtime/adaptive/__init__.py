"""Everything that chooses γ, W and the round rule: the engines ask `depth.make_depth_policy` for a policy
and tell it what each round did; nothing else in the runtime plans.

- depth.py: the public module: FixedDepth, and make_depth_policy (fixed or adaptive)
- adaptive.py: AdaptiveDepth, the parts below put together
- planner.py: cost estimates and α̂ → the round's γ and W (0: AR); no state
- probes.py: fork probes, drafted probes and AR checks, and their spacing
- stretches.py: how many steps an AR round writes in one request
- rates.py: the measured tokens per second of drafting against AR rounds
- governor.py: how many concurrent answers may draft at once (the rates, the client's CPU)
- alpha.py: α̂ per width
- faults.py: rounds whose draft or verifier failed: left out, AR while a role is down, and retries
- target_load.py: the target requests in flight across the answers
- round_plan.py: RoundPlan and the DepthPolicy protocol
- cost_model.py, cost_fit.py: what the target, a fork of n branches, the draft and the verifier cost
- step_lengths.py: the target's step lengths as the rounds see them
- client_cpu.py: the client's own CPU, which drafting rounds share
- theory.py: the expected speedup of a round shape at equal step lengths (on problems of N steps, for the
  benchmarks: eval/finite_theory.py)
- round_rules.py: the timelines of each round rule (longest, decision, async) replayed on real step lengths
- tuning.py: the tuned constants, each with the measurement that checks it
"""
