from flux7.shared.openai_compat import openai_path


def test_the_server_the_api_base_and_the_endpoint_itself_reach_the_same_endpoint() -> None:
    for base in ("http://h:8000", "http://h:8000/v1", "http://h:8000/v1/chat/completions"):
        assert base + openai_path(base, "chat/completions") == "http://h:8000/v1/chat/completions"
    assert openai_path("http://h/v1", "embeddings") == "/embeddings"
