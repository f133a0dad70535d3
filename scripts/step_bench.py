"""What scripts/profile_step.py and scripts/step_timeline.py share: which
benchmark program trains a model, and the options that pick its step."""


def bench_of(model):
    """The benchmark program that trains `model`: GPT-2 presets, or the Llama family."""
    return "gpubench_gpt" if model.startswith("gpt2") else "gpubench_llama"


def add_step_arguments(ap):
    """--build, --model, --batch, --seq, --format: the one step the benchmark's profile mode runs."""
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--format", default="bf16")


def profile_command(args, pipelined=0):
    """The benchmark's command line for one profiled step (5 warm-up steps first), or for
    `pipelined` steps run as the trainer runs them (each result read one step late)."""
    return [f"{args.build}/bench/{bench_of(args.model)}", args.model, str(args.batch), str(args.seq),
            str(pipelined or 1), args.format, "profile-pipelined" if pipelined else "profile"]
