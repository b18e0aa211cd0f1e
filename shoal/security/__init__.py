"""Security helpers of the core: a local certificate authority (:mod:`shoal.security.certs`) and the
Kafka ACLs each shoal role needs (:mod:`shoal.security.acls`). Pure functions over files and names."""
