"""Images: Dockerfiles rendered from the templates, built through the docker SDK, and CI workflows."""
