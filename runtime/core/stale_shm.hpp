// gradsync/core/stale_shm.hpp — removes the shared-memory files killed Open MPI jobs left.
//
// Purpose: Open MPI 4's shared-memory transport (the vader BTL) backs each rank's mailbox
//   with a file, /dev/shm/vader_segment.<host>.<ids>.<local rank> (4 MiB; the ids after
//   <host> differ between releases), and unlinks it in MPI_Finalize. A rank or an mpirun
//   killed by a signal (kill -9, a scheduler's time limit, the fault suite) never
//   finalizes, and the file stays until the machine reboots (open-mpi/ompi issues 6322 and
//   6547): memory the next jobs cannot use.
//   gradsync's programs remove such files at start-up (comm/mpi_comm.cpp, one rank per node;
//   GRADSYNC_SWEEP_STALE=0 turns it off; the same for mpirun's session directories, below).
// Approach: a file is stale when its name starts with the prefix, this user owns it, it is
//   at least min_age_s old (a job starting now may have created its file and not yet mapped
//   it; Open MPI does both in one call, so seconds are plenty) and no process maps it (every
//   /proc/<pid>/maps this user can read: a live job maps its segments for its whole life).
//   Only those are removed. The prefix names this host, so a container sharing /dev/shm
//   under another hostname, whose processes this one cannot see, keeps its files.
// Cost: one directory read; only when a candidate exists, one read of each process's maps.
//
// Session directories: mpirun keeps its job's files (PMIx's shared-memory stores, 8 MiB, the
// hwloc topology, contact files) under <tmp>/ompi.<host>.<uid>/pid.<mpirun's pid>/ and
// removes them when it exits; an mpirun killed by a signal leaves them. One is stale when
// the process of its pid is gone, it is at least min_age_s old, and no process maps a file
// under it; remove_stale_session_dirs removes it with all it holds.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

// Open MPI's vader segment prefix for this host: "vader_segment.<host>.", <host> the
// hostname up to its first dot (Open MPI's nodename without opal_keep_fqdn_hostnames). The
// user is the file's owner (remove_stale_segments checks it).
std::string vader_segment_prefix();

// Open MPI's vader backing directory: OMPI_MCA_btl_vader_backing_directory, else /dev/shm.
std::string vader_backing_directory();

// Removes the stale files (above) named prefix* in dir; returns the paths removed. Errors
// (an unreadable dir, a file gone meanwhile) remove nothing and throw nothing.
std::vector<std::string> remove_stale_segments(const std::string& dir, const std::string& prefix, double min_age_s);

// Open MPI's session directory of this host and user: <base>/ompi.<host>.<uid>, <base> from
// OMPI_MCA_orte_tmpdir_base, else TMPDIR, else /tmp.
std::string ompi_session_top_dir();

// Removes the stale pid.<N> directories (above) in top; returns the paths removed. Errors
// leave the rest and throw nothing.
std::vector<std::string> remove_stale_session_dirs(const std::string& top, double min_age_s);

}  // namespace gradsync
