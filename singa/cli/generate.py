"""``singa-train generate CHECKPOINT``: sample text from a gpt checkpoint.

::

    singa-train generate ck.zip --prompt "ROMEO:" --max-tokens 200 --temperature 0.8 --top-k 20 --seed 1

The model and its character vocabulary come from the checkpoint of a text run
(``singa-train gpt --checkpoint ck.zip``); sampling uses the key/value cache
(:mod:`singa.zoo.gpt_cache`), so each new character costs one position.
"""

from __future__ import annotations

import click

from singa.cli.errors import CliError, reported

__all__ = ["generate"]


@click.command("generate", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_path", metavar="CHECKPOINT", type=click.Path(exists=True, dir_okay=False))
@click.option("--prompt", default="\n", show_default=True, help="The text to continue.")
@click.option("--max-tokens", type=click.IntRange(min=0), default=200, show_default=True)
@click.option(
    "--temperature", type=click.FloatRange(min=0), default=1.0, show_default=True, help="0 is greedy."
)
@click.option("--top-k", type=click.IntRange(min=1), help="Sample from the k likeliest characters only.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--no-cache", is_flag=True, help="Rerun the whole window for every token (for comparison).")
@click.option("-v", "--verbose", is_flag=True, help="Print more details.")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure.")
def generate(
    checkpoint_path: str,
    prompt: str,
    max_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    no_cache: bool,
    verbose: bool,
    debug: bool,
) -> None:
    """Continue PROMPT with text sampled from the gpt model saved in CHECKPOINT."""
    from singa.cli.lm import load_lm

    with reported(debug, verbose):
        model, vocab, _ = load_lm(checkpoint_path)
        if not prompt:
            raise CliError("--prompt must not be empty")
        try:
            ids = vocab.encode(prompt)
        except ValueError as e:
            raise CliError(f"--prompt: {e}") from None
        out = model.generate(ids, max_tokens, temperature, top_k, seed, use_cache=not no_cache)
    click.echo(vocab.decode(out[0]))
