import Testing

@testable import FileWatching

@Suite("Coalescing of one settle window")
struct CoalescerTests {
    private func coalesce(_ changes: [RawChange]) -> [RawChange] {
        var coalescer = Coalescer()
        for change in changes { coalescer.add(change) }
        return coalescer.drain()
    }

    @Test("Created then written is one appearance; written twice is one change; created then deleted is nothing")
    func basics() {
        #expect(coalesce([.appeared("/d/a"), .changed("/d/a"), .changed("/d/a")]) == [.appeared("/d/a")])
        #expect(coalesce([.changed("/d/a"), .changed("/d/a")]) == [.changed("/d/a")])
        #expect(coalesce([.appeared("/d/a"), .changed("/d/a"), .removed("/d/a")]) == [])
        #expect(coalesce([.removed("/d/a"), .appeared("/d/a")]) == [.changed("/d/a")])
    }

    @Test("An atomic save is a change of the target")
    func atomicSave() {
        #expect(
            coalesce([
                .appeared("/d/.a.tmp"), .changed("/d/.a.tmp"), .moved(from: "/d/.a.tmp", to: "/d/a", replaced: true),
            ]) == [.changed("/d/a")]
        )
    }

    @Test("A directory made, filled and renamed in one window reports its files under the new name")
    func directoryRenamedAfterFilling() {
        let result = coalesce([
            .appeared("/d/tmp"), .appeared("/d/tmp/a"), .changed("/d/tmp/a"),
            .moved(from: "/d/tmp", to: "/d/final", replaced: false),
        ])
        #expect(result == [.appeared("/d/final/a"), .appeared("/d/final")])
    }

    @Test("A move into a path that then vanishes still says the source is gone")
    func moveThenRemove() {
        let result = coalesce([.appeared("/d/p"), .moved(from: "/d/b", to: "/d/p", replaced: true), .removed("/d/p")])
        #expect(result == [.removed("/d/b")])
    }

    @Test("Editors' saves are one change of the file: vim's backup goes again, emacs's stays as a new item")
    func editorSaves() {
        let vim = coalesce([
            .moved(from: "/d/x", to: "/d/x~", replaced: false), .appeared("/d/x"), .changed("/d/x"), .removed("/d/x~"),
        ])
        #expect(vim == [.changed("/d/x")])
        let emacs = coalesce([.moved(from: "/d/x", to: "/d/x~", replaced: false), .appeared("/d/x"), .changed("/d/x")])
        #expect(emacs == [.appeared("/d/x~"), .changed("/d/x")])
        // An older backup replaced: that backup changed.
        let overBackup = coalesce([.moved(from: "/d/x", to: "/d/x~", replaced: true), .appeared("/d/x")])
        #expect(overBackup == [.changed("/d/x~"), .changed("/d/x")])
    }
}
