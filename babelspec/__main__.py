from babelspec.cli import app

app(prog_name="babelspec")
