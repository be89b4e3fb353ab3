from importlib.metadata import PackageNotFoundError, version

try:  # one place: the package metadata (pyproject.toml's version, as installed)
    __version__ = version("babelspec")
except PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0+unknown"
