"""The Vertex AI endpoint: Google Vertex AI's prediction container contract on its own port."""
