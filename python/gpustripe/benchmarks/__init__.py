"""Benchmarks of ``gpustripe bench``: each module gives NAME, HELP, add_arguments(parser), run(args)."""
