"""Atomic outputs: write temporaries beside the targets, rename them into place only on success.

This is the only place nb creates output files. One command's outputs form one `OutputSet`:

1. every output is written to a temporary `.NAME.PID-TAG.nbtmp` in its target's directory (PID:
   the writing process; TAG: 4 hex digits of the host name and 4 random characters; NAME is
   shortened so that the temporary's name fits NAME_MAX);
2. all temporaries are flushed and fsynced; a failure (exception, Ctrl-C, full disk) up to here
   removes every temporary and leaves every target as it was (a temporary is recorded for removal
   in the same step that creates it: a Ctrl-C in between is held until it is, `sigint_held`);
3. with two or more outputs a journal `.nb-commit.PID-TAG.json` listing the renames is written and
   fsynced in the first output's directory: from then on the new set is decided;
4. the temporaries are renamed over their targets, in the order they were opened (the shards of a
   checkpoint before its index), the directories fsynced, and the journal removed.

A crash (SIGKILL, power loss) before step 3 leaves the old targets and some temporaries; after it,
a mix of renamed and not yet renamed outputs, every new file complete beside its temporary, and the
journal. The next nb run that writes into that directory, or opens a checkpoint in it, first
completes any journal whose process no longer runs (renames the temporaries it lists that still
exist) and then removes temporaries whose owner process (by PID, on this host) no longer runs; it
reports both as notes (`take_notes`; the CLI prints them as `nb: note: ...` after a successful run).

**A commit point** (a sharded checkpoint: `open(index, commit_point=True)`). Readers that are not nb
(transformers) see a set of files only through one of them, the index, so the index's rename is made
the one moment the new set appears for everyone: the outputs opened before it (the shards, written
under names the live index does not use: `layout.fresh_shard_name`) are renamed first, then the
index, then the outputs opened after it (config.json); last, the files `retire`d (the shards the old
index named and the new one does not) are removed. The journal (`"nb_commit": 2`) records the new
index's sha256: recovery finds the commit made when the index on disk has those bytes, and then
finishes it (renames what is left, removes the retired files); otherwise it rolls it back (removes
the new shards and temporaries), so the old index and its shards, never touched, stay the model.

**A new folder** (`staged_folder`, `nb export`): a reader such as transformers loads a model and its
tokenizer from several files, none of which names the others, so no order of renames makes them
appear together. The folder is written under a temporary name beside its target (`.NAME.PID-TAG.nbtmp`,
a directory; its files committed inside it as above) and renamed to the target, which must not exist
or be an empty directory: that one rename is the commit point. Recovery removes the staged folder of a
process that no longer runs (a rollback: the target stays absent or empty).

**An existing folder rewritten in place** (`swapped_folder`, `nb patch-checkpoint --in-place` of a model
folder): a copy of the folder is staged beside it, each file a hard link to the folder's own; the new
files are committed inside the copy as above, and one `renameat2(RENAME_EXCHANGE)` swaps the copy and the
folder: that swap is the commit point for every reader; the old folder, under the staging name now, is
removed. Recovery removes the staging folder of a process that no longer runs, before or after the swap
alike. Where the system cannot swap (see nbcli.atomic.swap), the files are committed into the folder
itself with a journal (old or new for nb, which finishes the commit before it reads).

Before anything is renamed, every target is checked again (its directory exists and is writable,
it is not a directory): a target that cannot take its file fails the command with nothing renamed.

`NB_FAULT_INJECT` (tests only) stops the process at a named point of the commit: see
nbcli.atomic.commit.

The package, by part: `checks` (output-path checks: the directory, the name's length), `temporaries`
(the temporaries' and journals' names, their owners, directory fsync), `commit` (OutputSet and the
atomic_write / write_*_atomic helpers, the NB_FAULT_INJECT hook), `recovery` (reading journals,
finishing or rolling back interrupted commits, removing stale temporaries), `swap` (an existing folder
rewritten through a swapped-in copy).
"""

from nbcli.atomic.checks import check_name_length, check_output_dir, name_max
from nbcli.atomic.commit import (OutputSet, atomic_write, sigint_held, staged_folder, start_writeback, take_committed,
                                 write_all_atomic, write_bytes_atomic, write_text_atomic)
from nbcli.atomic.recovery import recover_directory, recover_journal_now, take_notes
from nbcli.atomic.swap import swapped_folder
from nbcli.atomic.temporaries import JOURNAL_PREFIX, TEMP_SUFFIX, temp_name

__all__ = ["JOURNAL_PREFIX", "TEMP_SUFFIX", "OutputSet", "atomic_write", "check_name_length", "check_output_dir",
           "name_max", "recover_directory", "recover_journal_now", "sigint_held", "staged_folder", "start_writeback", "swapped_folder", "take_committed", "take_notes",
           "temp_name", "write_all_atomic", "write_bytes_atomic", "write_text_atomic"]
