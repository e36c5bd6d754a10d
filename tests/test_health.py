from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app


def test_healthz(tmp_path) -> None:
    client = TestClient(create_app(Settings(data_dir=tmp_path)))
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
