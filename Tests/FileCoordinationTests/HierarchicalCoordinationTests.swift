import ConcordTestSupport
import FileCoordination
import Foundation
import Testing

@Suite("Hierarchical coordination: directories and what is inside them")
struct HierarchicalCoordinationTests {
    let directory = TemporaryDirectory("hierarchy")

    static let containerOptions: [FileCoordinator.WritingOptions] = [.forDeleting, .forMoving, .forReplacing]

    private func quick() -> FileCoordinator {
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(150)
        return coordinator
    }

    @Test("A plain write of a directory does not wait for a reader or writer inside it", arguments: [false, true])
    func plainDirectoryWriteIgnoresContents(insideIsWriter: Bool) {
        let folder = directory.makeDirectory("folder")
        let inside = folder.appendingPathComponent("file.txt")
        let held = insideIsWriter ? HeldAccess(writing: inside) : HeldAccess(reading: inside)
        defer { held.end() }
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(5)
        #expect(throws: Never.self) { try coordinator.coordinate(writingItemAt: folder) { _ in } }
        #expect(throws: Never.self) { try coordinator.coordinate(readingItemAt: folder) { _ in } }
    }

    @Test("Deleting, moving or replacing a directory waits for an access deep inside it", arguments: containerOptions)
    func containerWriteWaitsForContents(option: FileCoordinator.WritingOptions) {
        let deep = directory.makeDirectory("folder", "a", "b")
        let held = HeldAccess(reading: deep.appendingPathComponent("file.txt"))
        let folder = directory("folder")
        #expect(
            coordinationCode { try quick().coordinate(writingItemAt: folder, options: option) { _ in } } == .timedOut
        )
        held.end()
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(5)
        #expect(throws: Never.self) { try coordinator.coordinate(writingItemAt: folder, options: option) { _ in } }
    }

    @Test(
        "Deleting, moving or replacing a directory blocks new accesses inside it, not beside it",
        arguments: containerOptions
    )
    func containerWriteBlocksContents(option: FileCoordinator.WritingOptions) {
        let folder = directory.makeDirectory("folder", "a")
        directory.makeDirectory("sibling")
        let held = HeldAccess(writing: directory("folder"), options: option)
        defer { held.end() }
        #expect(
            coordinationCode { try quick().coordinate(readingItemAt: folder.appendingPathComponent("x.txt")) { _ in } }
                == .timedOut
        )
        #expect(coordinationCode { try quick().coordinate(writingItemAt: folder) { _ in } } == .timedOut)
        #expect(coordinationCode { try quick().coordinate(readingItemAt: directory("folder")) { _ in } } == .timedOut)
        // Outside the directory, including a sibling whose name starts the same way, nothing waits.
        #expect(throws: Never.self) { try quick().coordinate(readingItemAt: directory("sibling", "y.txt")) { _ in } }
        #expect(throws: Never.self) { try quick().coordinate(writingItemAt: directory("folder-2.txt")) { _ in } }
        #expect(throws: Never.self) { try quick().coordinate(readingItemAt: directory.url) { _ in } }
    }

    @Test("A plain write of a directory excludes readers of that directory")
    func directoryItselfIsExcluded() {
        let folder = directory.makeDirectory("folder")
        let held = HeldAccess(writing: folder)
        defer { held.end() }
        #expect(coordinationCode { try quick().coordinate(readingItemAt: folder) { _ in } } == .timedOut)
    }

    @Test("Accesses to different items in one directory do not wait for each other")
    func siblingsAreIndependent() {
        let folder = directory.makeDirectory("folder")
        let held = HeldAccess(writing: folder.appendingPathComponent("one.txt"))
        defer { held.end() }
        #expect(throws: Never.self) {
            try quick().coordinate(writingItemAt: folder.appendingPathComponent("two.txt")) { _ in }
        }
    }

    @Test("A path through a symbolic link to a directory is the same item as the real path")
    func symbolicLinksAreResolved() throws {
        let real = directory.makeDirectory("real")
        let link = directory("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let held = HeldAccess(writing: real.appendingPathComponent("f.txt"))
        defer { held.end() }
        #expect(
            coordinationCode { try quick().coordinate(readingItemAt: link.appendingPathComponent("f.txt")) { _ in } }
                == .timedOut
        )
        // The link itself is an item of its own unless the reader asks for it to be resolved.
        var resolved: URL?
        #expect(throws: Never.self) { try quick().coordinate(readingItemAt: link) { _ in } }
        let target = directory("target.txt")
        try Data().write(to: target)
        let fileLink = directory("file-link")
        try FileManager.default.createSymbolicLink(at: fileLink, withDestinationURL: target)
        try quick().coordinate(readingItemAt: fileLink, options: .resolvesSymbolicLink) { resolved = $0 }
        #expect(resolved?.path == target.path)
    }

    @Test("Spellings with '.', '..' and doubled slashes name the same item")
    func spellingsAreCanonical() {
        let folder = directory.makeDirectory("folder", "sub")
        let held = HeldAccess(writing: folder.appendingPathComponent("f.txt"))
        defer { held.end() }
        let base = directory.url.path
        for spelling in ["\(base)/folder/./sub/f.txt", "\(base)/folder/sub/../sub/f.txt", "\(base)//folder/sub//f.txt"]
        {
            #expect(
                coordinationCode { try quick().coordinate(readingItemAt: URL(fileURLWithPath: spelling)) { _ in } }
                    == .timedOut,
                "\(spelling)"
            )
        }
        // A name that merely starts with dots is an ordinary name.
        #expect(throws: Never.self) {
            try quick().coordinate(readingItemAt: folder.appendingPathComponent("..f.txt")) { _ in }
        }
    }
}
