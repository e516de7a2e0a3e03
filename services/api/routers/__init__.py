"""The API's routes, one `APIRouter` per resource (services.api.app adds them to the app)."""
