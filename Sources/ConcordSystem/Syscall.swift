import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs a system call that returns `-1` and sets `errno` on failure, retrying on `EINTR`.
///
/// - Returns: the call's non-negative result.
/// - Throws: ``SystemCallError`` naming the call, the errno and `path`.
@inline(__always)
@discardableResult
package func retryingInterrupts<Result: BinaryInteger>(
    _ name: String,
    path: String? = nil,
    _ body: () -> Result
) throws(SystemCallError) -> Result {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemCallError(systemCall: name, errno: Errno(rawValue: code), path: path)
    }
}

/// The error number of the calling thread's last failed system call, as an `Errno`.
package var lastErrno: Errno { Errno(rawValue: errno) }
