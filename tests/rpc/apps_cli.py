from tests.rpc.apps import make_app

app, _ = make_app()
