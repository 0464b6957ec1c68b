"""The adaptive policy's tuned constants, in one place.

Each is a judgement, not a law: its comment says what it decides and, after "check:", the measurement to rerun
when it changes (`bench load`: the simulated-load bar, many answers on simulated servers whose costs are known;
`bench soak`: the frontend under load and faults; `bench replay`: round rules over recorded step lengths;
`servers probe`: real servers' costs). The module that uses a constant explains its rule.
"""

# the engines' fork (engine.py's `_streams`, planner.py)
STREAMED_MAX_ANSWERS = 8  # answers in flight on one policy up to which chain rounds stream their fork; beyond, a
# fork goes as one request (a streamed round costs the client about three times the CPU); check: bench load

# α̂ (alpha.py)
ALPHA_SLOW_FORGET = 0.99  # α̂'s long memory per round of each answer (a short one strays ±0.1); check: bench load
ALPHA_SHIFT_Z = 3.0  # standard errors between the two memories that restart α̂; check: bench load

# the measured rates (rates.py)
GAIN_TO_DRAFT = 1.03  # drafting must run this much faster than AR (0.99–1.06× let the set lose); check: bench load
STALE_FORGET = 0.98  # a rate's aging per round of the other kind; check: bench load
STALE_RENEW = 0.9  # an answer alone renews a drafting rate aged below this...
STALE_WEIGHT = 0.5  # ...keeping at most this share of the renewing round's time; check: bench load

# the drafting slots (governor.py)
GAIN_TO_WIDEN = 1.06  # rates this fast double the answers that may draft; check: bench load
CLIENT_CORES_TO_WIDEN = 0.8  # the client's CPU (cores) under which the slots may widen...
CLIENT_CORES_TO_NARROW = 0.9  # ...and over which they halve; check: bench soak

# planning (planner.py)
CEILING_MARGIN = 1.15  # free, always accepted drafts must beat AR by this for drafting to be tried; check: servers
# probe and bench load (on servers where B(n) ≈ n drafting loses at any α)
TREE_NODE_BUDGET = 16  # tree leaves the planner considers; check: bench sim
REPLAY_STEPS = 8  # step lengths seen before streamed rounds are priced by replaying them, and between two
# repricings of a replayed price; check: bench replay
REPLAY_DRAWS = 8  # seeded verdict draws per replayed price; check: bench replay

# probes and AR checks (probes.py)
PROBE_BUDGET = 0.02  # share of the time probes may cost while AR wins; check: bench load
PROBE_SHARE = 1.0  # a fork probe's extra branch writes this share of a step (a shorter branch's cost drowns in
# the noise of long steps where steps vary)...
PROBE_MIN_TOKENS = 4  # ...and at least this many tokens; check: bench load
PROBE_SPACING = (6, 400)  # AR steps between probes, at least and at most; check: bench load
PROBE_BACKOFF = 8  # fork probes' spacing doubles up to this many times the budget's; check: bench load

# AR stretches (stretches.py)
AR_STRETCH_STEPS = 8  # the fewest steps an AR round writes in one request while AR wins...
AR_STRETCH_SECONDS = 60.0  # ...and about this long at most, so that an answer stays responsive...
STRETCH_OVERHEAD = 0.02  # ...but more steps where a request's fixed cost is over this share; check: bench load
RATIONED_OVERHEAD = 0.04  # an answer left out of the drafting slots keeps its fixed cost within this; check: bench soak

# faults (faults.py)
FAULT_RETRY_S = 10.0  # while a role is down, one answer drafts this long after the last fault; check: bench soak

# the target's cost fit (cost_fit.py)
MAX_SLOPE = 1.5  # a step costs at most this much more per other request in flight (u bound); check: servers probe
MIN_LENGTH_SPREAD = 0.2  # spread of 1/L (std / mean) needed to fit the fixed cost o; check: bench sim
MIN_LOAD_SPREAD = 0.05  # spread of the loads (std / mean of 1 + x) needed to fit the slope; check: bench sim
FIT_SLOW_FORGET = 0.98  # the fit's slow memory per round of each answer; check: bench load
MAX_SLOPE_ERROR = 0.1  # a slope fitted over barely varying loads is trusted under this standard error (s)
INLIER_SCALES = 2.0  # a request further than this many typical residuals weighs (that / residual)² as much...
RESIDUAL_FLOOR = 0.05  # ...the typical residual being at least this share of the prediction,...
RESIDUAL_FORGET = 0.5  # ...forgetting this much per round (faster than the fit),...
RESIDUAL_CLIP = 3.0  # ...and moved by one residual at most this many times itself; check: bench soak
FIT_BEFORE_WEIGHTS = 10  # observations before the fit weighs them; check: bench load

# step lengths (step_lengths.py)
STEP_LENGTH_MEMORY = 64  # recent target steps the length estimate rests on; check: bench replay
