import torpor


@torpor.workflow(name="hello", version="1")
def hello(run: torpor.Run, name: str) -> str:
    text = run.step("compose", lambda: f"Hello, {name}!")  # recorded: never redone on resume
    run.effect("print", print, text)  # intent recorded before the call, result after
    return text


result = torpor.Runtime().run(hello, "world")
print(result.outcome, result.result)
