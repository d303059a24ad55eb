# Copyright 2026 The Flax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Activations as a dataset: what a model sows, streamed to disk.

``export(f, batches, path, names=...)`` writes the selected sites of every
batch to a store on disk (a zarr group, written with tensorstore), while the
device computes the next batch; ``Dataset(path)`` reads it back, with each
site's statistics and shuffled batches for training (a sparse autoencoder,
say). Under ``jax.distributed`` each process writes the shards it holds.

Modules, each a step of the way: ``reductions`` (on device: the example axis,
positions, casts, statistics, top-k), ``store`` (the layout on disk, its
progress and metadata), ``writer`` (the host thread writing batches),
``progress`` (the progress bar), ``export`` and ``dataset``.
"""

from flax.nnx.sow.activations.dataset import Dataset as Dataset
from flax.nnx.sow.activations.dataset import Statistics as Statistics
from flax.nnx.sow.activations.export import export as export

__all__ = ['Dataset', 'Statistics', 'export']
