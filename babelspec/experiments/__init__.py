"""The study: config, runner and store, output checks, aggregation, divergence, router.

``config``      the TOML experiment file (profiles in ``babelspec/profiles/``)
``store``       crash-safe SQLite store, one row per generated example
``prepare``     training of the drafters a setting needs (n-gram files, distilled students)
``runner``      the grid: languages x tasks x drafters x gamma, plus plain decoding
``checks``      in-the-requested-language and repetition-loop checks of each output
``aggregate``   per-cell statistics, measured speedups, cross-task matrix
``divergence``  draft/target total variation per character and its correlation with data size
``router``      the per-language choice of drafter and gamma behind ``--drafter auto``
``analysis``    everything above computed from a store, written as JSON
"""
