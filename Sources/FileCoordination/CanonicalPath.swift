import ConcordSystem
import Foundation

/// The one spelling of a path that every process agrees on, used to name its locks and to match
/// presenters: absolute, with `.` and `..` removed and the symbolic links of its parent
/// directories resolved. The last component is resolved only on request, so a link can be
/// coordinated as a link.
enum CanonicalPath {
    static func of(_ url: URL, resolvingLastComponent: Bool = false) throws(FileCoordinationError) -> String {
        guard url.isFileURL else {
            throw FileCoordinationError(code: .invalidRequest, url: url, message: "not a file URL")
        }
        var path = url.path(percentEncoded: false)
        if needsLexicalCleanup(path) { path = url.standardizedFileURL.path(percentEncoded: false) }
        guard path.hasPrefix("/") else {
            throw FileCoordinationError(code: .invalidRequest, url: url, message: "the path is not absolute")
        }
        do {
            if resolvingLastComponent, let resolved = try FileSystem.resolvedPath(path) { return resolved }
            return try resolvingParents(of: path)
        } catch {
            throw .systemCall(error, url: url)
        }
    }

    /// Whether the path has `.` or `..` components or doubled slashes (rare; the slow path).
    private static func needsLexicalCleanup(_ path: String) -> Bool {
        var previousSlash = false
        var dots = 0
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "/"):
                if previousSlash || dots == 1 || dots == 2 { return true }
                previousSlash = true
                dots = 0
            case UInt8(ascii: "."):
                if previousSlash || dots > 0 { dots += 1 } else { dots = -1 }
                previousSlash = false
            default:
                previousSlash = false
                dots = -1
            }
        }
        return dots == 1 || dots == 2
    }

    /// Resolves the deepest existing ancestor and appends the rest as written.
    ///
    /// Works on bytes: a "/" followed by a combining mark is still a separator to the kernel.
    private static func resolvingParents(of path: String) throws(SystemCallError) -> String {
        let slash = UInt8(ascii: "/")
        var bytes = Array(path.utf8)
        var end = bytes.count
        while end > 1 && bytes[end - 1] == slash { end -= 1 }
        if end <= 1 { return "/" }
        bytes.append(0)
        var cut = end
        while true {
            cut -= 1
            while cut > 0 && bytes[cut] != slash { cut -= 1 }
            // Under "/" nothing needs resolving.
            if cut == 0 { break }
            // The parent is bytes[0..<cut]: terminate it there for the call.
            let saved = bytes[cut]
            bytes[cut] = 0
            let found: String? = try bytes.withUnsafeBufferPointer { (buffer) throws(SystemCallError) in
                let pointer = UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self)
                return try FileSystem.resolvedDirectory(pointer) { resolved -> String? in
                    guard let resolved else { return nil }
                    let base = resolved.count == 1 ? 0 : resolved.count
                    let restCount = end - cut - 1
                    return String(unsafeUninitializedCapacity: base + 1 + restCount) { output in
                        for index in 0..<base { output[index] = resolved[index] }
                        output[base] = slash
                        for index in 0..<restCount { output[base + 1 + index] = buffer[cut + 1 + index] }
                        return base + 1 + restCount
                    }
                }
            }
            bytes[cut] = saved
            if let found { return found }
        }
        return String(decoding: bytes[0..<end], as: UTF8.self)
    }

    /// Whether `descendant` lies strictly inside `ancestor`.
    static func isStrictlyInside(_ descendant: String, _ ancestor: String) -> Bool {
        let inner = descendant.utf8
        let outer = ancestor.utf8
        if ancestor == "/" { return descendant != "/" }
        guard inner.count > outer.count, inner.starts(with: outer) else { return false }
        return inner[inner.index(inner.startIndex, offsetBy: outer.count)] == UInt8(ascii: "/")
    }
}
