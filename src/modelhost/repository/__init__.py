"""Model repositories: where model directories are found and which version directories they hold."""
