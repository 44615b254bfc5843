"""Megatron-LM's phase transitions (`--phase-transition-iterations "100,200"`), for migration.

At each listed iteration the job saves a checkpoint and exits; the user relaunches it with the
next phase's data arguments, and each launch reads a fresh training split sized for its phase
only, from its first sample (consumed samples count per phase; the global batch size is fixed).
`PhaseTransitions` is that arithmetic; `PhaseStepPlan` is the step plan of one phase. The rules
are in docs/schedules.md, "Megatron's phase transitions", with how jaxblend's own staged blends
(`--data_schedule`, one stream across stages) differ.
"""

from __future__ import annotations

import bisect
import dataclasses

from jaxblend import identity
from jaxblend.sampling.step_plan import FixedStepPlan, SegmentedStepPlan, StepPlan
from jaxblend.validation import require_int

FLAG = "--phase_transition_iterations"
FIXED_BATCH = (
    f"{FLAG} requires a fixed global batch size (Megatron compares it at every resume)"
)


@dataclasses.dataclass(frozen=True)
class PhaseTransitions:
    """The phases of a run split at `iterations` (Megatron's `--phase-transition-iterations`).

    Phase p (0-based) runs steps `[t_p, t_{p+1})` with `t_0 = 0` and the last phase ending at
    `train_steps`; its samples are `[t_p x B, t_{p+1} x B)` of the run, the last phase's ending at
    `train_samples`.

    Attributes:
      iterations: the transition steps, strictly increasing, each in [1, train_steps).
      global_batch_size: B, fixed for the whole run.
      train_steps: steps of the run (Megatron's `--train-iters`).
      train_samples: samples of the run (Megatron's `--train-samples`); the end of the last
        phase's samples. None: `train_steps x B`.
    """

    iterations: tuple[int, ...]
    global_batch_size: int
    train_steps: int
    train_samples: int | None = None

    def __post_init__(self) -> None:
        require_int("PhaseTransitions.global_batch_size", self.global_batch_size, 1)
        require_int("PhaseTransitions.train_steps", self.train_steps, 1)
        object.__setattr__(self, "iterations", tuple(self.iterations))
        for t in self.iterations:
            require_int(f"{FLAG}: a transition", t, 1)
        if list(self.iterations) != sorted(set(self.iterations)):
            raise ValueError(
                f"PhaseTransitions.iterations must be strictly increasing, got {self.iterations} "
                "(PhaseTransitions.parse sorts them as Megatron does)"
            )
        if not self.iterations:
            raise ValueError(f"{FLAG}: no transition given")
        bad = [t for t in self.iterations if not 0 < t < self.train_steps]
        if bad:
            raise ValueError(
                f"{FLAG}: transition {bad[0]} is outside [1, {self.train_steps - 1}]: every "
                f"transition must fall inside the run (--train_iters={self.train_steps}), a "
                "phase has at least one step"
            )
        if self.train_samples is not None:
            require_int("PhaseTransitions.train_samples", self.train_samples, 1)
            if self.train_samples < self.train_steps * self.global_batch_size:
                raise ValueError(
                    f"train_samples={self.train_samples} is fewer than the run's "
                    f"{self.train_steps} steps x global batch size {self.global_batch_size}"
                )

    @classmethod
    def parse(
        cls,
        text: str,
        global_batch_size: int,
        train_steps: int,
        train_samples: int | None = None,
    ) -> PhaseTransitions:
        """Parses `"100,200"` as Megatron does (sorted; a repeated iteration counts once).

        Raises:
          ValueError: one line naming the flag and the value.
        """
        try:
            values = [int(p) for p in str(text).split(",")]  # int() strips the blanks
        except ValueError:
            raise ValueError(
                f"{FLAG}={text!r}: expected comma-separated step numbers, e.g. '100,200'"
            ) from None
        return cls(tuple(sorted(set(values))), global_batch_size, train_steps, train_samples)

    @classmethod
    def over(
        cls,
        plan: StepPlan,
        iterations: str | tuple[int, ...],
        train_samples: int | None = None,
    ) -> PhaseTransitions:
        """The phases of a run whose steps follow `plan` (its `num_steps` = the run's steps).

        Raises:
          ValueError: one line: `plan` does not have one fixed batch size (a ramp-up, a step
            batch-size schedule, token-budget batches), or the transitions are invalid.
        """
        if not isinstance(plan, FixedStepPlan):  # a value error: the plan's kind is the setting
            raise ValueError(  # noqa: TRY004
                f"{FIXED_BATCH}; the run's batches follow a {type(plan).__name__}: drop the "
                "batch-size ramp-up / schedule / token budget, or use staged blends "
                "(--data_schedule), which take any step plan"
            )
        if isinstance(iterations, str):
            return cls.parse(iterations, plan.global_batch_size, plan.num_steps, train_samples)
        return cls(tuple(iterations), plan.global_batch_size, plan.num_steps, train_samples)

    @property
    def num_phases(self) -> int:
        """Phases of the run (transitions + 1)."""
        return len(self.iterations) + 1

    @property
    def end_sample(self) -> int:
        """Where the last phase's samples end (Megatron's `train_samples`)."""
        if self.train_samples is not None:
            return self.train_samples
        return self.train_steps * self.global_batch_size

    def phase_of(self, step: int) -> int:
        """The phase holding `step` (a transition step is the first of the next phase).

        `step` is the number of steps done (Megatron's `iteration`), in [0, train_steps]; the
        finished run's `train_steps` belongs to the last phase.
        """
        if not 0 <= step <= self.train_steps:
            raise IndexError(f"step {step} out of range [0, {self.train_steps}]")
        return bisect.bisect_right(self.iterations, step)

    def step_range(self, phase: int) -> tuple[int, int]:
        """`[first step, exit step)` of `phase`."""
        self._check_phase(phase)
        bounds = (0, *self.iterations, self.train_steps)
        return bounds[phase], bounds[phase + 1]

    def sample_range(self, phase: int) -> tuple[int, int]:
        """`[first, end)` run samples of `phase` (Megatron's last/next transition sample)."""
        self._check_phase(phase)
        b = self.global_batch_size
        bounds = (0, *(t * b for t in self.iterations), self.end_sample)
        return bounds[phase], bounds[phase + 1]

    def phase_samples(self, phase: int) -> int:
        """Samples of `phase`'s fresh training split (Megatron's
        `train_samples_in_current_phase`)."""
        first, end = self.sample_range(phase)
        return end - first

    def samples_in_phase(self, step: int) -> int:
        """Samples of its phase consumed before `step` (Megatron's
        `consumed_train_samples_in_current_phase` at iteration `step`)."""
        first, _ = self.step_range(self.phase_of(step))
        return (step - first) * self.global_batch_size

    def exit_step(self, step: int) -> int | None:
        """The transition at which a job that starts at `step` saves and exits; None in the last
        phase (the job runs to the end)."""
        phase = self.phase_of(step)
        return None if phase == len(self.iterations) else self.iterations[phase]

    def plan(self, phase: int) -> PhaseStepPlan:
        """The step plan of `phase`."""
        return PhaseStepPlan(self, phase)

    def to_json(self) -> dict:
        """Plain JSON of the transitions (what a checkpoint records)."""
        return {
            **dataclasses.asdict(self), "iterations": list(self.iterations),
            "train_samples": self.end_sample,
        }

    def _check_phase(self, phase: int) -> None:
        if isinstance(phase, bool) or not 0 <= phase < self.num_phases:
            raise IndexError(f"phase {phase} out of range [0, {self.num_phases})")


@dataclasses.dataclass(frozen=True)
class PhaseStepPlan(SegmentedStepPlan):
    """The steps of one phase: step k of the run holds the phase's samples from
    `(k - first step) x B`, over a source built for the phase alone (`num_samples` samples).

    Steps are numbered as in the whole run (a loader resumes from the run's step number); steps
    outside the phase raise `IndexError`. `num_steps` is the phase's exit step, so a loader stops
    there. One run of B-sized steps, starting at the phase's first step with its sample 0.

    Attributes:
      transitions: the run's phases.
      phase: this plan's phase.
    """

    transitions: PhaseTransitions
    phase: int
    _segments: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.transitions._check_phase(self.phase)
        self._set_segments([(self.first_step, 0, self.global_batch_size)])

    @property
    def first_step(self) -> int:
        """The phase's first step (its transition; 0 for the first phase)."""
        return self.transitions.step_range(self.phase)[0]

    @property
    def global_batch_size(self) -> int:
        return self.transitions.global_batch_size

    @property
    def num_steps(self) -> int:
        return self.transitions.step_range(self.phase)[1]

    @property
    def num_samples(self) -> int:
        return self.transitions.phase_samples(self.phase)

    @property
    def fingerprint(self) -> str:
        first, end = self.transitions.sample_range(self.phase)
        return identity.fingerprint(
            "phase_step_plan", 1, global_batch_size=self.global_batch_size, phase=self.phase,
            first_step=self.first_step, exit_step=self.num_steps, samples=(first, end),
        )

    def _check(self, step: int) -> int:
        if not self.first_step <= step < self.num_steps:
            raise IndexError(
                f"step {step} is outside phase {self.phase} (steps [{self.first_step}, "
                f"{self.num_steps}))"
            )
        return int(step)
