import CConcordShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

extension FileSystem {
    /// `pipe2(O_CLOEXEC)`: a pipe whose two ends no spawned program inherits unless it is handed
    /// them explicitly (a `dup2` in a spawn's file actions).
    public static func makePipe() throws(SystemCallError) -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        try retryingInterrupts("pipe2") { concord_pipe_cloexec(&fds) }
        return (fds[0], fds[1])
    }
}
