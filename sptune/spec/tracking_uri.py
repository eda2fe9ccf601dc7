"""Which MLflow tracking URIs can work: a scheme MLflow's tracking store registry knows, or a plain path.

Stdlib only: the spec reads it (tracking.uri) and the preflight does (--tracking-uri), neither importing MLflow.
"""

from __future__ import annotations

from urllib.parse import urlsplit

# MLflow's tracking store schemes; a database URL may name its driver (postgresql+psycopg2).
HTTP_SCHEMES = ("http", "https")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
OTHER_SCHEMES = ("file", "databricks", "databricks-uc", "uc")
FIX = ("use http://HOST:PORT of an MLflow server, sqlite:////ABSOLUTE/PATH/mlflow.db, a database URL "
       "(postgresql://...), file:///PATH, or drop it for SQLite in the output directory")


def tracking_uri_problem(uri: str) -> str | None:
    """Why MLflow could not track to ``uri`` (None: a scheme it knows, or a plain path)."""
    scheme = urlsplit(uri).scheme.lower()
    if not scheme or len(scheme) == 1:  # a path (a Windows drive letter parses as a one-letter scheme)
        return None
    if scheme in HTTP_SCHEMES + OTHER_SCHEMES or scheme.split("+", 1)[0] in DATABASE_SCHEMES:
        return None
    known = ", ".join(HTTP_SCHEMES + DATABASE_SCHEMES + OTHER_SCHEMES)
    return f"'{scheme}://' is not a tracking store scheme MLflow knows ({known})"
