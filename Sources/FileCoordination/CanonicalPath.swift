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
            return try resolvingParents(of: trimmed(path))
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

    private static func trimmed(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }

    /// Resolves the deepest existing ancestor and appends the rest as written.
    private static func resolvingParents(of path: String) throws(SystemCallError) -> String {
        if path == "/" { return path }
        var parent = FileSystem.parentPath(of: path)
        var rest = [String(path[path.index(after: path.lastIndex(of: "/")!)...])]
        while true {
            if let resolved = try FileSystem.resolvedDirectory(parent) {
                let base = resolved == "/" ? "" : resolved
                return base + "/" + rest.reversed().joined(separator: "/")
            }
            if parent == "/" { return path }
            rest.append(String(parent[parent.index(after: parent.lastIndex(of: "/")!)...]))
            parent = FileSystem.parentPath(of: parent)
        }
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
