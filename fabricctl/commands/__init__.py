"""One module per command; ALL lists them in the order `fabricctl --help` shows them."""

from . import (
    access_sync,
    checkpoint_list,
    checkpoint_replicate,
    checkpoint_restore,
    checkpoint_rollback,
    checkpoint_snapshot,
    checkpoint_volume_create,
    checkpoint_volume_destroy,
    completion,
    config_check,
    dataset_create,
    dataset_destroy,
    dataset_ingest,
    dataset_seal,
    list_versions,
    metrics,
    plan_checkpoint,
    publish,
    replica_serve,
    replicate,
    rotate,
    status,
    unpublish,
    verify,
)

ALL = [dataset_create, dataset_ingest, dataset_seal, dataset_destroy, publish, unpublish, replicate, list_versions,
       status, metrics, verify, checkpoint_volume_create, checkpoint_volume_destroy, checkpoint_snapshot,
       checkpoint_list, checkpoint_restore, checkpoint_rollback, checkpoint_replicate, rotate, access_sync,
       plan_checkpoint, replica_serve, config_check, completion]
